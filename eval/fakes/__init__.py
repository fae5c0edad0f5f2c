"""Loopback stand-ins for what this machine cannot reach, shared by tests and benchmarks: GitHub's
REST API and git over HTTP (``github_api``), an OpenAI-compatible server with scripted replies
(``llm_server``) and one that misbehaves on purpose (``faulty_llm_server``).

Imports the floor only. Servers bind loopback.
"""
