"""The ``resverify`` command line: one module per command, and the suite runner.

``main`` parses the command line and dispatches to a command module
(:data:`resverify.cli.main.COMMANDS`: ``check``, ``run``, ``replay``, ``claims``,
``backends``, ``vectors``, ``blocks``). For ``check``: ``request`` checks the whole command
line once into a request; ``claim_source`` runs the claim checker; ``runner`` runs the
property suite under pytest in a child process and follows it (``collector`` is loaded into
that child); ``evidence`` holds the records and the one pure function that makes the report
document of them; ``plots_run`` is the one drawing process; ``stop_signals`` turns Ctrl-C and
SIGTERM into an orderly stop; ``summary`` prints the closing lines. The commands decide no
verdict themselves: those come from :mod:`resverify.reports.verdicts`.

Public API: the ``resverify`` command (``resverify.cli.main:main``, its options in
docs/commands.md) and its exit codes; nothing here is promised to importers.
"""
