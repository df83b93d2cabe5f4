"""The ``hxd2`` command line and the Ray jobs behind it: one module per command, over :mod:`serve` and the library.

Where things are, by layer from top to bottom (the "Job layers" import-linter contract in ``pyproject.toml``: a
module imports only from the layers below its own): the commands: :mod:`index` (``hxd2 index``: build or change an
index on Ray, and the dispatch of its subcommands), :mod:`evaluate` (``hxd2 eval``: run, grid, report, compare,
judge), :mod:`graphflow` (``hxd2 graphflow``: train a policy on Ray Train, evaluate one), :mod:`calibrate`
(``hxd2 calibrate-refusal``), :mod:`serve_cli` (``hxd2 serve``), :mod:`index_kb` (``hxd2 index-kb``: an index from a
triple file, no NER, no Ray), :mod:`graph_cli` (``hxd2 graph``: export, show, stats), :mod:`keys_cli`
(``hxd2 keys``: tenants' API keys). A command's parts that another command runs too: :mod:`index_update`
(``hxd2 index delete``), :mod:`index_verify` (``hxd2 index verify``), :mod:`index_reads` (``hxd2 index reindex-reads``),
:mod:`index_backup` (``hxd2 index export`` and ``import``), :mod:`query` (``hxd2 query``), :mod:`serve_placement`
(replicas the cluster cannot place, said while ``hxd2 serve`` runs), :mod:`process_reaper` (what ``hxd2 serve``
started and left behind, stopped before it exits). The run around a command: :mod:`console`
(quiet by default: logs to a file, progress on the terminal), :mod:`index_wiring` (what every ``hxd2 index`` command
wires alike: the Ray runner, the LLM cache and budget flags, the exit status of a stopped run), :mod:`cli` (the
``hxd2`` entry point, subcommands loaded lazily, and the helpers commands share). Below them: :mod:`telemetry` (a
job's counters: stages report to one actor), :mod:`cluster_check` (does every node see the driver's inputs and
output), :mod:`index_format` (what ``hxd2 index`` prints); and at the bottom :mod:`progress` (the progress board),
:mod:`job_metrics` (the jobs' Prometheus metrics) and :mod:`result_stdout` (stdout kept for a command's result),
and under the board :mod:`interrupts` (a Ctrl-C that a library swallowed ends the command at the next stage).
Nothing in :mod:`serve` or :mod:`hxd2_ray` imports jobs, and :mod:`cli` loads a command only when it runs, so
``hxd2 --help`` imports no Ray, vLLM or torch.
"""
