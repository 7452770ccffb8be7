"""What annotators see and answer, read from the task's YAML (`labels` section).

The labeling protocol is configuration: the example id, the label column, the choices an
annotator picks from (each mapped to the label's value), the fields shown, the question asked and
the composite segments that drift monitoring may flag. The Label Studio labeling config is
generated from it, and the same names tie the exported tasks, the model's pre-annotations and the
annotations that come back: a result's `from_name` is the label, its `to_name` the example id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

from pipelines.task.contracts import TaskSpec

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
# A task's label budget when its YAML names none: examples sent to labeling per partition.
DEFAULT_BUDGET = 150


@dataclass(frozen=True)
class LabelBudget:
    """How many of a partition's examples go to labeling: a fixed `count`, or a `share` of the
    partition's examples (`labels.budget: 150` or `labels.budget: 5%` in the task's YAML)."""

    count: int | None = DEFAULT_BUDGET
    share: float | None = None

    @classmethod
    def parse(cls, raw: Any) -> LabelBudget:
        """The budget a YAML value names: a whole number, or a percentage such as "5%"."""
        if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
            return cls(count=raw)
        text = str(raw).strip()
        if text.endswith("%"):
            try:
                percent = float(text[:-1])
            except ValueError:
                percent = -1.0
            if 0 < percent <= 100:
                return cls(count=None, share=percent / 100)
        raise ValueError(
            f"labels: budget {raw!r} is neither a whole number of examples per partition (150) "
            "nor a percentage of a partition's examples (5%)"
        )

    def for_partition(self, examples: int) -> int:
        """The examples to send to labeling out of a partition's `examples`."""
        if self.share is not None:
            return round(self.share * examples)
        return int(self.count or 0)


@dataclass(frozen=True)
class LabelingSpec:
    """A task's labeling protocol."""

    task: str
    example_id: str
    label: str
    # Choice shown to annotators -> the label's value, in the order they are shown. A binary
    # label maps one choice to true and one to false: the model's score is P(true).
    choices: dict[str, Any]
    shown: tuple[str, ...] = ()
    question: str = ""
    # Composite segment types: name -> the columns whose values, joined by "-", name a segment.
    # Any other segment type is a column of the example's features.
    segments: dict[str, tuple[str, ...]] = field(default_factory=dict)
    budget: LabelBudget = field(default_factory=LabelBudget)

    def __post_init__(self) -> None:
        for what, name in (("example_id", self.example_id), ("label", self.label)):
            if not name or not set(name) <= _NAME_CHARS:
                raise ValueError(f"labels: {what} {name!r} is not a plain column name")
        if len(self.choices) < 2:
            raise ValueError(f"labels: choices needs at least two choices, got {self.choices}")
        values = list(self.choices.values())
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"labels: choices map two choices to one value: {self.choices}")

    @property
    def from_name(self) -> str:
        """The control's name in the labeling config: a result's `from_name`."""
        return self.label

    @property
    def to_name(self) -> str:
        """The object's name in the labeling config: a result's `to_name`."""
        return self.example_id

    def task_id(self, example_id: str) -> str:
        """The project's own id of the labeling task for one example."""
        return f"T-{example_id}"

    def value_of(self, choice: str) -> Any:
        """The label's value of a choice (KeyError if it is not one)."""
        return self.choices[choice]

    def choice_for_score(self, score: float) -> str:
        """The pre-annotated choice for a model's score: for a binary label P(true), true from
        0.5; for ordered classes the expected class over K - 1 (`ml.labels.score_of`), the
        nearest class."""
        if all(isinstance(v, bool) for v in self.choices.values()):
            return self._binary_choice(score >= 0.5)
        last = len(self.choices) - 1
        return list(self.choices)[math.floor(min(max(score, 0.0), 1.0) * last + 0.5)]

    def _binary_choice(self, value: bool) -> str:
        matches = [c for c, v in self.choices.items() if v is value]
        if len(matches) != 1:
            raise ValueError(
                f"task {self.task!r}: pre-annotation needs a binary label, one choice mapped to "
                f"true and one to false; choices are {self.choices}"
            )
        return matches[0]

    def choice_of(self, value: Any) -> str:
        """The choice an annotator picks for a label value (the simulated annotators' answer)."""
        if isinstance(value, bool):
            return self._binary_choice(value)
        for choice, v in self.choices.items():
            if v == value:
                return choice
        raise KeyError(f"no choice maps to {value!r}; choices are {self.choices}")

    def result(self, choice: str) -> list[dict[str, Any]]:
        """A Label Studio result that picks `choice`."""
        return [
            {
                "from_name": self.from_name,
                "to_name": self.to_name,
                "type": "choices",
                "value": {"choices": [choice]},
            }
        ]

    def labeling_config(self) -> str:
        """The Label Studio labeling config: the shown fields, the question and the choices."""
        lines = ["<View>"]
        if self.question:
            lines.append(f"  <Header value={quoteattr(self.question)}/>")
        lines.append(f'  <Text name="{self.to_name}" value="${self.example_id}"/>')
        for name in self.shown:
            if not set(name) <= _NAME_CHARS:
                raise ValueError(f"labels: shown field {name!r} is not a plain column name")
            if name != self.example_id:
                lines.append(f'  <Header value="{name}" size="6"/>')
                lines.append(f'  <Text name="shown_{name}" value="${name}"/>')
        lines.append(
            f'  <Choices name="{self.from_name}" toName="{self.to_name}" '
            'choice="single-radio" required="true" showInline="true">'
        )
        lines += [f"    <Choice value={quoteattr(c)}/>" for c in self.choices]
        lines += ["  </Choices>", "</View>"]
        return "\n".join(lines)  # no trailing newline: Label Studio strips it


def parse_labeling_spec(task: TaskSpec) -> LabelingSpec:
    """The task's labeling protocol, from its YAML's `labels` section."""
    raw: Mapping[str, Any] = task.sections.get("labels") or {}
    missing = [k for k in ("example_id", "label", "choices") if k not in raw]
    if missing:
        raise ValueError(f"{task.path}: labels: needs {', '.join(missing)}")
    choices = raw["choices"]
    if not isinstance(choices, Mapping):
        raise ValueError(f"{task.path}: labels.choices must map each choice to a label value")
    segments = raw.get("segments") or {}
    try:
        return LabelingSpec(
            task=task.name,
            example_id=raw["example_id"],
            label=raw["label"],
            choices={str(c): v for c, v in choices.items()},
            shown=tuple(raw.get("shown") or ()),
            question=str(raw.get("question") or ""),
            segments={str(k): tuple(v) for k, v in segments.items()},
            budget=LabelBudget.parse(raw.get("budget", DEFAULT_BUDGET)),
        )
    except ValueError as e:
        raise ValueError(f"{task.path}: {e}") from None
