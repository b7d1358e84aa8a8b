# The documentation's `make` targets, over the nox sessions (noxfile.py) that CI runs.
PYTHON ?= python3

.PHONY: check bench

## lint · format check · strict types · every distribution's tests · integration · build · docs
check:
	bash .ci/run

## the benchmarks beside their peers, in a venv of their own (arguments: make bench ARGS="core --quick")
bench:
	$(PYTHON) -m pip install -q nox uv && $(PYTHON) -m nox -s bench -- $(ARGS)
