"""The test sandbox: one command run isolated, in namespaces of its own, with a scrubbed environment,
no network, limits and a hard timeout (``process``), and the first process inside it (``jail``).

Floor: imports only the rest of the floor. Everything that runs code under test goes through here.
"""
