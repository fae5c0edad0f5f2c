"""Delivery to GitHub: tokens and GitHub App access (``client``) and the publisher that pushes a
branch and opens or updates a PR (``pr``).

Floor: imports only the rest of the floor and PyGithub.
"""
