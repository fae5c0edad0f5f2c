"""Evidence from running code: runtime errors the loop's tests show (``findings``), crash context for
the Coder (``crash``, ``pytest_crash_plugin``), the issue's own code run at the base and again with
the patch (``issue_run``, ``issue_tracer``, ``replay``), and the LLM runtime-error check (``llm_check``).

Imports the floor and the rest of ``scoring``.
"""
