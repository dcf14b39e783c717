"""How an evaluation runs: episodes, batching, mode, sharding, retries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rollbench import perturb
from rollbench.config.fields import opt
from rollbench.errors import ConfigError


@dataclass(frozen=True)
class RecordRule:
    """--eval.recording's choice of episodes: --eval.record's outcome (all, failures,
    successes) and --eval.record_conditions (a sweep's every condition, or its control)."""

    mode: str = "all"
    conditions: str = "all"

    def wants(self, condition: str) -> bool:
        """Whether an episode under `condition` may be kept (its frames are worth keeping)."""
        return self.conditions == "all" or not condition

    def keeps(self, success: bool, condition: str) -> bool:
        """Whether a finished episode with this outcome under `condition` goes into the dataset."""
        return self.wants(condition) and (self.mode == "all" or (self.mode == "failures") != success)


@dataclass(frozen=True)
class EvalConfig:
    n_episodes: int = opt(50, "episodes per task (with --eval.ci_width: the most a task runs)")
    ci_width: float | None = opt(
        None,
        "adaptive: a task stops once the 95% Wilson interval of its success rate is at most this wide (e.g. "
        "0.1 = +-5 points), decided on whole prefixes of episodes, every --eval.ci_block episodes; "
        "--eval.n_episodes is the maximum (docs/adaptive.md)",
    )
    ci_block: int = opt(
        10, "adaptive: episodes between two looks of --eval.ci_width's or --eval.versus's rule (and lockstep's default batch)"
    )
    versus: str | None = opt(
        None,
        "adaptive: the --output_dir of another run (same benchmark and seeds; finished, or running now): each task "
        "stops once an anytime-valid sequential test of this run against it decides better, worse or equivalent "
        "(docs/compare.md); --eval.n_episodes is the maximum",
    )
    versus_alpha: float = opt(
        0.05, "--eval.versus: the test's level over all tasks (each task at alpha / tasks); --eval.perturb_stop=paired: "
        "over all conditions and tasks (each at alpha / (conditions x tasks))")
    versus_margin: float = opt(
        0.05, "--eval.versus, --eval.perturb_stop=paired: equivalent when the difference of success rates is surely "
        "within this")
    versus_design: str = opt(
        "anytime",
        "--eval.versus, --eval.perturb_stop=paired: anytime (a betting confidence sequence: better, worse or equivalent, valid at any stop) or "
        "fixed (an exact group-sequential McNemar test with --eval.n_episodes as its budget: better or worse, the "
        "power of a fixed-n test with fewer episodes; docs/compare.md)",
    )
    batch_size: int | None = opt(
        None,
        "lockstep mode (lerobot-eval's meaning): envs of one task stepped together per batch "
        "(default min(50, n_episodes)); continuous mode runs --workers x --slots_per_worker slots instead "
        "(rows per policy call: --policy.max_batch_size)",
    )
    use_async_envs: bool = opt(
        False, "lockstep mode with --eval.isolation=none: step the batch's envs in subprocesses (AsyncVectorEnv)"
    )
    isolation: Literal["process", "none"] = opt(
        "process",
        "lockstep mode: process: the batch's envs step in env worker processes (--workers of them), so a crashing "
        "or hanging env costs only its episodes; none: in this process, as lerobot-eval does (for debugging; a "
        "crash ends the run; with --eval.mode=auto it also picks lockstep mode)",
    )
    mode: Literal["auto", "continuous", "lockstep"] = opt(
        "auto",
        "continuous: slots reset into the next episode at once (needs per-slot policy state); "
        "lockstep: lerobot-eval's batches; auto: continuous when the policy allows it",
    )
    perturb: str = opt(
        "",
        "robustness sweep: AXIS=LEVEL[,LEVEL...], several axes joined by ';' or the flag repeated "
        "(action.noise, action.latency, state.noise, language.drop, language.paraphrase, image.noise, image.blur, "
        "image.brightness, image.contrast, image.occlusion, image.jpeg, image.shift; inside MetaWorld and LIBERO also "
        "camera.shift, camera.rotate, light.intensity, object.shift); every task runs --eval.n_episodes under "
        "the control and under each level, on the control's seeds (docs/robustness.md)",
    )
    perturb_stop: str = opt(
        "none",
        "adaptive sweep: paired: each condition of a task stops once an anytime-valid sequential test of its "
        "episodes against the control's same-seed ones decides better, worse or equivalent (--eval.versus_alpha, "
        "_margin, _design; --eval.ci_block); the control stops once every condition of its task has; "
        "--eval.n_episodes is the maximum; none: no such stop (docs/robustness.md)",
    )
    paraphrases: str = opt(
        "",
        "language.paraphrase's table: a JSON or TOML file (or inline JSON) of a task's name or instruction -> its "
        "paraphrases; language.paraphrase=k gives each episode the k-th (docs/robustness.md)",
    )
    max_parallel_tasks: int = opt(
        1, "lockstep mode: tasks run at once (threads), each with a shallow policy copy (shared weights)"
    )
    max_episodes_rendered: int = opt(
        4,
        "videos of the first K episodes of every task (videos/<group>_<task_id>/episode_<i>.mp4; lerobot-eval "
        "films 10; report.html shows 4 per task); 0: no rendering",
    )
    video_size: int = opt(
        256,
        "video frames: pixels on the longer side, rendered for people without multisampling, shadows or "
        "reflections, apart from what the policy sees (pixel observations are filmed as the policy sees them; "
        "PushT draws at --env.visualization_width)",
    )
    video_fps: int = opt(
        10,
        "video frames per second of simulated time: every k-th step is filmed (k = the benchmark's fps // "
        "video_fps, at least 1), and the last; videos play in real time. >= the benchmark's fps: every step",
    )
    recording: bool = opt(
        False,
        "lerobot-eval's --eval.recording: write the episodes as a LeRobot dataset (observations as the env gave "
        "them, actions, rewards, done, success, task; images as video): <output_dir>/dataset, or "
        "--eval.recording_root; each episode is saved when it ends (docs/recording.md)",
    )
    recording_repo_id: str | None = opt(
        None, "--eval.recording: as lerobot-eval, push the dataset to the hub under this repo id at the end of the run "
        "(the dataset is saved first; a failed push is reported with the command that retries it); it is also the "
        "dataset's repo id (default rollbench/<output_dir's name>, not pushed)",
    )
    recording_private: bool = opt(False, "--eval.recording_repo_id: make the pushed dataset private")
    recording_root: str | None = opt(None, "--eval.recording: where the dataset is written (default <output_dir>/dataset)")
    record: Literal["all", "failures", "successes"] = opt(
        "all", "--eval.recording: which episodes go into the dataset (failures: to study or relabel them)"
    )
    record_conditions: Literal["all", "control"] = opt(
        "all", "--eval.recording with --eval.perturb: all: every condition's episodes, each frame naming its "
        "condition (to train on perturbed data); control: the control's only (clean data; docs/recording.md)",
    )
    report: bool = opt(True, "write report.html at the end (charts, videos; about 1 s of CPU, most of it importing matplotlib)")
    shard_id: int = opt(0, "which shard of the plan this process runs (0-based)")
    num_shards: int = opt(1, "how many shards the plan is split into")
    max_retries: int = opt(2, "times a unit is retried after its worker crashed or hung")
    step_timeout_s: float = opt(120.0, "a step, reset or policy call taking longer than this counts as a hang")

    def __post_init__(self) -> None:
        if self.n_episodes < 1:
            raise ConfigError(f"--eval.n_episodes={self.n_episodes} is not allowed; it must be >= 1")
        if self.ci_width is not None and not 0 < self.ci_width < 1:
            raise ConfigError(
                f"--eval.ci_width={self.ci_width} is not allowed; it must be between 0 and 1 (the width of a 95% "
                f"interval of the success rate, as a fraction: 0.1 = +-5 points)"
            )
        self._check_recording()
        self._check_perturb()
        self._check_stop_rules()
        self._check_batches_and_shards()
        self._check_videos()
        if self.max_retries < 0:
            raise ConfigError(f"--eval.max_retries={self.max_retries} is not allowed; it must be >= 0")
        if not self.step_timeout_s > 0:
            raise ConfigError(f"--eval.step_timeout_s={self.step_timeout_s} is not allowed; it must be > 0")

    def _check_recording(self) -> None:
        """Raises ConfigError when a --eval.record* flag is given to a run that does not record."""
        if not self.recording and (self.record != "all" or self.recording_repo_id or self.recording_root
                                   or self.recording_private or self.record_conditions != "all"):
            given = next(f for f, v in (("--eval.record", self.record != "all"), ("--eval.recording_repo_id",
                         self.recording_repo_id), ("--eval.recording_root", self.recording_root),
                         ("--eval.recording_private", self.recording_private),
                         ("--eval.record_conditions", self.record_conditions != "all")) if v)
            raise ConfigError(f"{given} belongs to a recorded run; add --eval.recording=true")

    def _check_perturb(self) -> None:
        """Raises ConfigError when --eval.perturb or --eval.paraphrases cannot be read, or the
        sweep asks for what it does not have (paraphrases) or cannot do (--eval.versus)."""
        if self.paraphrases:
            perturb.paraphrase_table(self.paraphrases)
        if self.perturb:
            perturb.check_sweep(perturb.parse(self.perturb), self.perturb, "--eval.perturb")
            paraphrased = any(perturb.condition(c).get("language.paraphrase") for c in self.conditions)  # parses them
            if paraphrased and not self.paraphrases:
                raise ConfigError("--eval.perturb: language.paraphrase needs --eval.paraphrases=FILE, the paraphrases of "
                                  "each task's instruction")
            if self.versus is not None:
                raise ConfigError("--eval.perturb with --eval.versus: a sweep is not compared with another run; "
                                  "--eval.perturb_stop=paired compares each condition with the sweep's control")

    def _check_stop_rules(self) -> None:
        """Raises ConfigError when the stop rules' flags are out of range or two stop rules are given."""
        if self.perturb_stop not in ("none", "paired"):
            raise ConfigError(f"--eval.perturb_stop={self.perturb_stop!r} is not allowed; use paired or none")
        if self.perturb_stop == "paired" and not self.perturb:
            raise ConfigError("--eval.perturb_stop=paired stops a sweep's conditions; it needs --eval.perturb")
        if self.perturb_stop == "paired" and self.ci_width is not None:
            raise ConfigError("--eval.perturb_stop=paired and --eval.ci_width are two stop rules; give one of them")
        if self.versus is not None and self.ci_width is not None:
            raise ConfigError("--eval.versus and --eval.ci_width are two stop rules; give one of them")
        if self.versus_design not in ("anytime", "fixed"):
            raise ConfigError(f"--eval.versus_design={self.versus_design!r} is not allowed; use anytime or fixed")
        if not 0 < self.versus_alpha < 1:
            raise ConfigError(f"--eval.versus_alpha={self.versus_alpha} is not allowed; it must be between 0 and 1")
        if not 0 < self.versus_margin < 1:
            raise ConfigError(
                f"--eval.versus_margin={self.versus_margin} is not allowed; it must be between 0 and 1 (a difference "
                f"of success rates: 0.05 = 5 points)"
            )
        if self.ci_block < 1:
            raise ConfigError(f"--eval.ci_block={self.ci_block} is not allowed; it must be >= 1")

    def _check_batches_and_shards(self) -> None:
        """Raises ConfigError when a batch, the shards or the tasks at once are out of range."""
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"--eval.batch_size={self.batch_size} is not allowed; it must be >= 1")
        if self.num_shards < 1:
            raise ConfigError(f"--eval.num_shards={self.num_shards} is not allowed; it must be >= 1")
        if not 0 <= self.shard_id < self.num_shards:
            raise ConfigError(
                f"--eval.shard_id={self.shard_id} is not allowed with --eval.num_shards="
                f"{self.num_shards}; it must be in 0..{self.num_shards - 1}"
            )
        if self.max_parallel_tasks < 1:
            raise ConfigError(f"--eval.max_parallel_tasks={self.max_parallel_tasks} is not allowed; it must be >= 1")

    def _check_videos(self) -> None:
        """Raises ConfigError when the videos' count, size or frame rate is out of range."""
        if self.max_episodes_rendered < 0:
            raise ConfigError(f"--eval.max_episodes_rendered={self.max_episodes_rendered} is not allowed; it must be >= 0")
        if not 16 <= self.video_size <= 4096:
            raise ConfigError(
                f"--eval.video_size={self.video_size} is not allowed; it must be 16..4096 "
                f"(pixels on the longer side of a video frame)"
            )
        if self.video_fps < 1:
            raise ConfigError(
                f"--eval.video_fps={self.video_fps} is not allowed; it must be >= 1 (frames per second of "
                f"simulated time); --eval.max_episodes_rendered=0 films nothing"
            )

    @property
    def adaptive(self) -> bool:
        """Whether a stop rule may end a task (or a sweep's condition) before --eval.n_episodes."""
        return self.ci_width is not None or self.versus is not None or self.perturb_stop != "none"

    @property
    def conditions(self) -> tuple[str, ...]:
        """The ids of --eval.perturb's conditions, the control ("") first; ("",) without it."""
        return tuple(c.id for c in perturb.parse(self.perturb))

    @property
    def is_sweep(self) -> bool:
        """Whether the run is a robustness sweep: conditions beside the control (the one place
        that asks; eval_info's LeRobot keys are then the control's, `per_condition` the rest)."""
        return len(self.conditions) > 1

    @property
    def record_mode(self) -> RecordRule | None:
        """Which episodes' frames are kept (None: not recording)."""
        return RecordRule(self.record, self.record_conditions) if self.recording else None

    @property
    def envs_per_batch(self) -> int:
        """Lockstep mode: envs per batch (a batch never holds more envs than a task has episodes).
        An adaptive run looks every `ci_block` episodes, so its batches default to a block."""
        default = self.ci_block if self.adaptive else 50
        return min(self.batch_size or default, self.n_episodes)
