"""The bundled offline task repo: how its instances are loaded.

The task repo is ``evaluation/swebench/data`` (``sweb.yaml`` + ``tasks/<id>/``; where it lives:
`records.TASK_REPO`), data kept apart from this code, in the format ``swebench dataset check``
validates; the projects' sources live in ``repos/<name>/``.
"""

from __future__ import annotations

from pathlib import Path

from evaluation.swebench.records import TASK_REPO, SweInstance


def load_instances(instance_ids: list[str] | None = None, task_repo: Path = TASK_REPO) -> list[SweInstance]:
    """Instances of a task repo (all, or those named), read with swebench's own loader.

    Raises ValueError naming unknown ids, so a typo never silently shrinks a run.
    """
    from swebench.task.repo import load_task_repo

    try:
        return [SweInstance.from_dict(d) for d in load_task_repo(task_repo, instance_ids)]
    except KeyError as e:
        raise ValueError(f"unknown instance id(s): {e.args[0]}") from None
