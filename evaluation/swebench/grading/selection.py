"""Which instances a predictions file grades, decided as swebench decides, every one accounted for.

Every prediction must name an instance of the dataset: one that does not is an error naming it
(swebench stops on it too). The selection is the instances asked for (`--instances`), else every
prediction's. A selected instance without a prediction is an error naming it, unless
`--allow-missing`: then it is counted as `missing` in the closing line and the report. An
empty-string patch is no patch (`empty`), as swebench counts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from evaluation.swebench.inputs import InputError
from evaluation.swebench.records import Prediction, SweInstance
from mars_openhands.hints import flag

#: at most this many ids in an error
SHOWN = 10


@dataclass
class Selection:
    instances: list[SweInstance]                                   # to grade, in the selection's order
    patches: dict[str, str | None] = field(default_factory=dict)   # instance id -> patch (None: empty)
    missing: list[str] = field(default_factory=list)               # selected, without a prediction


def _ids(ids: Sequence[str]) -> str:
    return " ".join(ids[:SHOWN]) + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def select(predictions: Sequence[Prediction], dataset: Sequence[SweInstance], wanted: Sequence[str] | None, *,
           source: str, dataset_name: str, allow_missing: bool, instances_flag: str = "--instances") -> Selection:
    """The instances `predictions` (read from `source`) grade among `dataset`; InputError for an
    unknown id or, without `allow_missing`, a selected instance without a prediction."""
    by_id = {i.instance_id: i for i in dataset}
    unknown = [p.instance_id for p in predictions if p.instance_id not in by_id]
    if unknown:
        raise InputError(f"{source}: {len(unknown)} prediction(s) for instances not in {dataset_name}: "
                         f"{_ids(unknown)} (swebench refuses them too)")
    patches = {p.instance_id: p.model_patch or None for p in predictions}
    ids = list(wanted) if wanted is not None else [i.instance_id for i in dataset if i.instance_id in patches]
    missing = [i for i in ids if i not in patches]
    if missing and not allow_missing:
        raise InputError(f"{source}: no prediction for {len(missing)} of the {len(ids)} selected instances: "
                         f"{_ids(missing)}; pass {flag('--allow-missing')} to count them as missing, or select "
                         f"the predicted ones ({flag(instances_flag, 'ID,...')})")
    chosen = [by_id[i] for i in ids if i in patches]
    return Selection(chosen, {i.instance_id: patches[i.instance_id] for i in chosen}, missing)
