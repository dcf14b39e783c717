"""The adapter docs/python_api.md shows (verbatim, checked by tests/test_api.py): a LeRobot policy
in memory for rollbench.Evaluator, as lerobot-train's periodic eval would hand it."""

import copy

import torch

from rollbench.policies.lerobot import to_policy_batch


class InMemoryLeRobot:
    """A LeRobot policy in memory with its processors, called as lerobot-eval calls it."""

    per_slot_state = False  # lockstep, as lerobot-eval runs it: a batch's episodes start together

    def __init__(self, policy, preprocessor, postprocessor):
        self.policy, self.preprocessor, self.postprocessor = policy, preprocessor, postprocessor

    def __copy__(self):  # tasks side by side (--eval.max_parallel_tasks): a queue each
        return InMemoryLeRobot(copy.copy(self.policy), self.preprocessor, self.postprocessor)

    def torch_modules(self):
        return [self.policy]

    def reset(self, slots, episodes):
        self.policy.reset()

    def act(self, batch, slots):
        with torch.inference_mode():
            action = self.policy.select_action(self.preprocessor(to_policy_batch(batch)))
            return self.postprocessor(action).to("cpu").numpy()
