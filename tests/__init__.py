"""The test suite. A package, so ``tests.fakes`` is one importable name for the tests and for the
benchmarks in evals/ alike (./dev puts the checkout on .venv's path; pytest puts the rootdir on it)."""
