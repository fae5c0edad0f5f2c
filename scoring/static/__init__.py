"""Reading a patch without running it: differential static analysis (``differential``), attributes
that exist nowhere (``names``), the unsafe-patch guard (``guard``), and what a diff touches
(``patchinfo``).

Imports the floor and the rest of ``scoring``.
"""
