"""Per-op error report (``--verify`` of a fused / Winograd model): every fused op against the unfused subgraph it
replaced, on the same inputs, on each delegate backend.

:mod:`.boundary` maps fused ops to tensors of the unfused graph, :mod:`.probe` builds the models that run,
:mod:`.run` runs them (``op_report``), :mod:`.report` is the table, :mod:`.args` the shared ``--verify-backend``
flag. Import the submodules (this package imports nothing, so the CLIs stay quick to start). docs/verify.md shows
how to read the table.
"""
