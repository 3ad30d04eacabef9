"""The ``resverify`` command line: one module per command, and the suite runner.

``resverify.cli.main`` parses the command line and dispatches to a command module
(:data:`resverify.cli.main.COMMANDS`); ``runner`` runs the property suite under pytest in a
child process and follows it (``collector`` is loaded into that child); ``claim_source``
runs the claim checker for ``check``. The commands decide nothing themselves: the verdicts
come from the suite and the report from :mod:`resverify.reports`.
"""
