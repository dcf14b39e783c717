"""Tiny third-party LeRobot policy plugins, made discoverable without touching the venv.

A plugin is a package plus its `*.dist-info/METADATA` in a folder that goes on PYTHONPATH:
`importlib.metadata` lists it as an installed distribution, so LeRobot's
`register_third_party_plugins` (and rollbench) import it as they import a pip-installed one.
`tiny` is a real `PreTrainedPolicy` (a linear map from the state to the action) laid out as
LeRobot's convention wants (`configuration_tiny.TinyConfig`, `modeling_tiny.TinyPolicy`,
`processor_tiny.make_tiny_pre_post_processors`); its config's `returns` makes it answer
otherwise than LeRobot's interface. `patcher` registers no policy: it replaces
`lerobot.policies.factory.get_policy_class` on import, as `lerobot-policy-proprio` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFIGURATION = '''
from dataclasses import dataclass, field

from lerobot.configs.policies import PreTrainedConfig
from lerobot.configs.types import NormalizationMode
from lerobot.optim.optimizers import AdamWConfig


@PreTrainedConfig.register_subclass("tiny")
@dataclass
class TinyConfig(PreTrainedConfig):
    # "action": LeRobot's interface; "tuple": (action, reward) as RewACT; "extra": reads an input no env gives
    returns: str = "action"
    normalization_mapping: dict = field(default_factory=lambda: {
        "VISUAL": NormalizationMode.IDENTITY, "STATE": NormalizationMode.MEAN_STD, "ACTION": NormalizationMode.MEAN_STD,
    })

    def get_optimizer_preset(self):
        return AdamWConfig(lr=1e-4)

    def get_scheduler_preset(self):
        return None

    def validate_features(self):
        pass

    @property
    def observation_delta_indices(self):
        return None

    @property
    def action_delta_indices(self):
        return [0]

    @property
    def reward_delta_indices(self):
        return None
'''

MODELING = '''
from torch import nn

from lerobot.policies.pretrained import PreTrainedPolicy

from .configuration_tiny import TinyConfig


class TinyPolicy(PreTrainedPolicy):
    config_class = TinyConfig
    name = "tiny"

    def __init__(self, config, **kwargs):
        super().__init__(config)
        self.config = config
        self.linear = nn.Linear(config.robot_state_feature.shape[0], config.action_feature.shape[0])

    def get_optim_params(self):
        return self.parameters()

    def reset(self):
        pass

    def forward(self, batch):
        return ((self.predict_action_chunk(batch)[:, 0] - batch["action"]) ** 2).mean(), None

    def predict_action_chunk(self, batch, **kwargs):
        return self.linear(batch["observation.state"])[:, None]

    def select_action(self, batch, **kwargs):
        action = self.predict_action_chunk(batch)[:, 0]
        if self.config.returns == "tuple":
            return action, action.sum(-1)
        if self.config.returns == "extra":
            return action + batch["observation.reward"]
        return action
'''

PROCESSOR = '''
from lerobot.processor import (
    AddBatchDimensionProcessorStep,
    DeviceProcessorStep,
    NormalizerProcessorStep,
    PolicyProcessorPipeline,
    RenameObservationsProcessorStep,
    UnnormalizerProcessorStep,
)
from lerobot.processor.converters import policy_action_to_transition, transition_to_policy_action
from lerobot.utils.constants import POLICY_POSTPROCESSOR_DEFAULT_NAME, POLICY_PREPROCESSOR_DEFAULT_NAME


def make_tiny_pre_post_processors(config, dataset_stats=None):
    features = {**config.input_features, **config.output_features}
    pre = [
        RenameObservationsProcessorStep(rename_map={}),
        AddBatchDimensionProcessorStep(),
        DeviceProcessorStep(device=config.device),
        NormalizerProcessorStep(features=features, norm_map=config.normalization_mapping, stats=dataset_stats,
                                device=config.device),
    ]
    post = [
        UnnormalizerProcessorStep(features=config.output_features, norm_map=config.normalization_mapping,
                                  stats=dataset_stats),
        DeviceProcessorStep(device="cpu"),
    ]
    return (
        PolicyProcessorPipeline(steps=pre, name=POLICY_PREPROCESSOR_DEFAULT_NAME),
        PolicyProcessorPipeline(steps=post, name=POLICY_POSTPROCESSOR_DEFAULT_NAME,
                                to_transition=policy_action_to_transition, to_output=transition_to_policy_action),
    )
'''

PATCHER = '''
import lerobot.policies.factory as factory

_original = factory.get_policy_class


def get_policy_class(name):
    return _original(name)


factory.get_policy_class = get_policy_class
'''


def _distribution(root: Path, name: str, version: str, files: dict[str, str]) -> None:
    package = root / name
    package.mkdir(parents=True)
    for filename, text in files.items():
        (package / filename).write_text(text)
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{name}\n")
    (info / "RECORD").write_text("".join(f"{name}/{f},,\n" for f in files))


def make_tiny_plugin(root: Path) -> Path:
    """`lerobot_policy_tiny` 0.1.0 in `root` (a folder for PYTHONPATH)."""
    _distribution(root, "lerobot_policy_tiny", "0.1.0", {
        "__init__.py": "from .configuration_tiny import TinyConfig\nfrom .modeling_tiny import TinyPolicy\n"
                       "from .processor_tiny import make_tiny_pre_post_processors\n",
        "configuration_tiny.py": CONFIGURATION, "modeling_tiny.py": MODELING, "processor_tiny.py": PROCESSOR,
    })
    return root


def make_patching_plugin(root: Path) -> Path:
    """`lerobot_policy_patcher` 0.2.0 in `root`: replaces LeRobot's `get_policy_class` on import."""
    _distribution(root, "lerobot_policy_patcher", "0.2.0", {"__init__.py": PATCHER})
    return root


def with_path(*folders: Path) -> dict[str, str]:
    """The environment of a process that has `folders` (plugins) on its PYTHONPATH first."""
    paths = [*map(str, folders), str(TESTS), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


_SAVE = '''
import sys
from pathlib import Path

import torch

from lerobot.policies.factory import get_policy_class, make_policy_config
from lerobot.utils.import_utils import register_third_party_plugins
from lerobot_helpers import dataset_stats, policy_features, save_like_lerobot_train
from rollbench.benchmarks.pusht import PushTConfig

register_third_party_plugins()  # as lerobot-train does before it parses its flags
inputs, outputs = policy_features(PushTConfig())
for out, returns in zip(sys.argv[1::2], sys.argv[2::2]):
    cfg = make_policy_config("tiny", input_features=inputs, output_features=outputs, device="cpu", returns=returns)
    torch.manual_seed(0)
    policy = get_policy_class("tiny")(cfg)
    save_like_lerobot_train(policy, cfg, Path(out), dataset_stats(inputs, outputs, 256.0, 100.0))
'''


def save_tiny_checkpoints(plugins: Path, outs: dict[str, Path]) -> dict[str, Path]:
    """`tiny` checkpoints for PushT (pixels and agent_pos), {returns: folder}, saved as
    lerobot-train saves one, in one process that finds the plugin as an installed distribution."""
    args = [a for returns, out in outs.items() for a in (str(out), returns)]
    subprocess.run([sys.executable, "-c", _SAVE, *args], env=with_path(plugins), check=True, timeout=300)
    return outs
