"""The LLM boundary: a chat model against any OpenAI-compatible server with budgets and structured
output (``llm``), finding a local server without being told (``discover``), and the scripted model
that stands in for an LLM in tests and offline benchmarks (``scripted``).

Floor: imports only the rest of the floor.
"""
