"""The benchmark kit: SD1.5 (random-weight fp32) on one GPU machine, our delegate next to LiteRT CPU / GPU and
PyTorch, in one run (README.md). Its entry points run as modules from the repository root
(``python3 -m bench.bench``, ``python3 -m bench.pack``, ...); the shell wrappers (prepare.sh, run.sh) do that."""
