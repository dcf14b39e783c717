"""Third-party LeRobot policy plugins (`lerobot_policy_*` distributions): a tiny plugin built
here is found as LeRobot finds it, evaluated through
`--policy.type=<its type> --policy.path=DIR` equal to lerobot-eval, recorded with a plugin that
patches LeRobot on import; one whose `select_action` differs from LeRobot's is refused in one
line. Runs rollbench in subprocesses: a plugin imported into pytest's process would stay there."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lerobot")

from conftest import load_info, per_episode, run_subprocess
from helpers_lerobot_plugins import make_patching_plugin, make_tiny_plugin, save_tiny_checkpoints, with_path
from lerobot_helpers import lerobot_eval_pusht

pytestmark = [pytest.mark.lerobot]

SEED = 1000
RUN = ("--env.type=pusht", "--env.episode_length=10", "--eval.n_episodes=4", f"--seed={SEED}")


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The plugin folders and a checkpoint of each `tiny` variant."""
    root = tmp_path_factory.mktemp("plugins")
    tiny, patcher = make_tiny_plugin(root / "tiny"), make_patching_plugin(root / "patcher")
    ckpts = save_tiny_checkpoints(tiny, {r: root / f"ckpt-{r}" for r in ("action", "tuple", "extra")})
    return {"tiny": tiny, "patcher": patcher, **ckpts}


def _path(*folders: Path) -> dict[str, str]:
    return {"PYTHONPATH": with_path(*folders)["PYTHONPATH"]}


@pytest.mark.slow
def test_a_plugin_checkpoint_runs_by_its_type_in_two_workers_equal_to_lerobot_eval(plugins: dict[str, Path], tmp_path: Path) -> None:
    """`--policy.type=tiny --policy.path=DIR` in lockstep with 2 env workers (PushT rendered in
    their processes, the policy in the driver's); every episode equals lerobot-eval's on the same
    checkpoint with the same plugins installed; the plugins, and the entry point one of them
    replaced, are in eval_info.json's versions."""
    out = tmp_path / "run"
    res = run_subprocess("eval", *RUN, "--policy.type=tiny", f"--policy.path={plugins['action']}",
                         "--eval.mode=lockstep", "--workers=2", "--eval.batch_size=2", f"--output_dir={out}",
                         **_path(plugins["tiny"], plugins["patcher"]))
    assert res.rc == 0, res.err[-3000:]
    info = load_info(out)
    assert info["config"]["policy"]["type"] == "lerobot" and info["config"]["policy"]["lerobot_type"] == "tiny"
    versions = info["versions"]
    assert versions["lerobot_policy_tiny"] == "0.1.0" and versions["lerobot_policy_patcher"] == "0.2.0"
    assert versions["lerobot.policies.factory:get_policy_class"] == "replaced by lerobot_policy_patcher 0.2.0"
    assert "lerobot_policy_patcher replaced LeRobot's lerobot.policies.factory.get_policy_class" in res.err
    ours = [per_episode(out)[("pusht", 0, i)][:3] for i in range(4)]
    theirs = lerobot_eval_pusht(plugins["action"], tmp_path / "lerobot", episodes=4, length=10, seed=SEED, batch_size=2,
                                env=_path(plugins["tiny"], plugins["patcher"]))
    assert len({r for _, r, _ in ours}) > 1  # the episodes differ: the policy acts on what it sees
    for (s1, r1, m1), (s2, r2, m2) in zip(ours, theirs, strict=True):
        assert s1 == s2 and r1 == pytest.approx(r2, abs=1e-6) and m1 == pytest.approx(m2, abs=1e-6)


#: each refusal's checkpoint variant, extra flags, exit code and words of its one line
REFUSALS = [
    ("tuple", ["--policy.type=tiny"], 1,
     ["'tiny' policy's select_action returned a tuple of 2 (Tensor of shape (2, 2), Tensor of shape (2,))",
      "expected a tensor of shape (2, 2)"]),
    ("extra", [], 1, ["'tiny' policy's select_action asked for input 'observation.reward'", "observation.state"]),
    ("action", ["--policy.type=act"], 2, ["--policy.type=act: the checkpoint", "is a 'tiny' policy", "give --policy.type=tiny"]),
    ("action", ["--policy.type=tinny"], 2,
     ["no policy type named 'tinny'. Did you mean 'tiny'? Known: expert", "plugins' (with --policy.path): act,", ", tiny,"]),
]

#: rollbench's CLI called once per argv in one process (LeRobot is imported once, not per refusal)
_MANY = """
import contextlib, io, json, sys
from rollbench.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    out.append([rc, err.getvalue()])
print(json.dumps(out))
"""


def test_a_plugin_that_differs_from_lerobot_or_from_the_flags_is_refused_in_one_line(plugins: dict[str, Path], tmp_path: Path) -> None:
    """A `select_action` that returns (action, reward) as RewACT's does, one that reads an input no env
    gives, a LeRobot type that is not the checkpoint's, and a misspelt plugin type: each one line."""
    argvs = [["eval", *RUN, *flags, f"--policy.path={plugins[variant]}", "--eval.mode=lockstep", "--eval.isolation=none",
              "--eval.batch_size=2", "--eval.max_episodes_rendered=0", f"--output_dir={tmp_path / str(i)}"]
             for i, (variant, flags, _, _) in enumerate(REFUSALS)]
    proc = subprocess.run([sys.executable, "-c", _MANY, json.dumps(argvs)], capture_output=True, text=True, timeout=600,
                          env=with_path(plugins["tiny"]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for (variant, flags, code, words), (rc, err) in zip(REFUSALS, json.loads(proc.stdout.splitlines()[-1]), strict=True):
        lines = [ln for ln in err.strip().splitlines() if ln.startswith("rollbench:")]
        assert rc == code and len(lines) == 1 and "Traceback" not in err, (variant, flags, err[-3000:])
        for w in words:
            assert w in lines[0], lines[0]


def test_without_its_plugin_a_checkpoint_is_unknown_in_one_line(cli, plugins: dict[str, Path], tmp_path: Path) -> None:
    """In this process, where no plugin is installed."""
    res = cli("eval", *RUN, f"--policy.path={plugins['action']}", f"--output_dir={tmp_path / 'run'}")
    assert res.rc == 2, res.err[-3000:]
    assert "policy type 'tiny' is unknown to the installed lerobot" in res.err and "lerobot_policy_tiny" not in res.err
    assert "Known: act," in res.err


# -- a plugin from PyPI: lerobot-policy-act-ttt (ACT with test-time training) ------------------

_ACT_TTT = """
import sys
from pathlib import Path
from lerobot.utils.import_utils import register_third_party_plugins
from lerobot_helpers import make_checkpoint
from rollbench.benchmarks.pusht import PushTConfig
register_third_party_plugins()
make_checkpoint(Path(sys.argv[1]), PushTConfig(), policy_type="act_ttt", chunk_size=10, n_action_steps=10, dim_model=32,
                n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, n_vae_encoder_layers=1,
                latent_dim=8, pretrained_backbone_weights=None, ttt_steps=1, ttt_ss_head_latent_dim=16)
"""


@pytest.mark.slow
def test_act_ttt_from_pypi_runs_by_its_type(tmp_path: Path) -> None:
    """A published plugin that builds offline (random init, no pretrained backbone) and acts: a
    checkpoint saved as lerobot-train saves it, evaluated by `--policy.type=act_ttt`. Its
    `predict_action_chunk` trains the model on each observation before it acts, so its episodes
    would depend on what it saw before: refused at its first weight change, it runs with
    --policy.fresh_weights=true, the same episodes in 1 and 2 workers."""
    if importlib.util.find_spec("lerobot_policy_act_ttt") is None:  # not imported here: a plugin stays where imported
        pytest.skip("lerobot-policy-act-ttt is not installed (the Makefile's install-dev installs it on Python 3.12)")
    ckpt, out = tmp_path / "ckpt", tmp_path / "run"
    subprocess.run([sys.executable, "-c", _ACT_TTT, str(ckpt)], env=with_path(), check=True, timeout=300)
    flags = ("eval", "--env.type=pusht", "--env.episode_length=5", "--eval.n_episodes=2", f"--seed={SEED}",
             "--policy.type=act_ttt", f"--policy.path={ckpt}")
    res = run_subprocess(*flags, f"--output_dir={tmp_path / 'refused'}")
    assert res.rc == 1 and "(it trains at test time)" in res.err and "--policy.fresh_weights=true" in res.err, res.err[-3000:]
    runs = {}
    for workers in (1, 2):
        out = tmp_path / f"run{workers}"
        res = run_subprocess(*flags, "--policy.fresh_weights=true", f"--workers={workers}", f"--output_dir={out}")
        assert res.rc == 0, res.err[-3000:]
        runs[workers] = per_episode(out)
    info = load_info(tmp_path / "run1")
    assert info["versions"]["lerobot_policy_act_ttt"] == "0.1.2" and info["overall"]["n_episodes"] == 2
    assert runs[1] == runs[2]
