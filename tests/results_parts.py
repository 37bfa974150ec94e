"""The results pages' shared cast: a batch in the form's order, and results delivered."""

from studio import engine, originals
from studio.models import Asset, Batch, Origin, Subject, Task, TaskState
from studio.store import move
from tests.factories import batch_request, png_bytes


def deliver(task: Task, seed: int, *, history: bool = True) -> Asset:
    """Give `task` a stored result, linked to its subjects, as the worker's copy would."""
    original = originals.save(png_bytes(seed))
    asset = Asset.objects.create_stored(
        original,
        file_name=f"{task.provider}-{seed}.png",
        origin=Origin.GENERATED,
        label=f"{task.provider_label} · {task.frame} #{task.ordinal}",
        ember_history_id=f"hist_{seed}" if history else "",
        batch=task.batch,
        task=task,
        prompt=task.prompt,
        provider=task.provider,
    )
    asset.subjects.add(*task.subjects)
    move(task, TaskState.DONE if history else TaskState.HISTORY_MISSING, asset=asset)
    return asset


def mixed_batch(subject: Subject) -> Batch:
    """A batch whose request lists Imagen before FLUX, and headshots before images."""
    return engine.generate(
        request=batch_request(
            subject,
            providers=[
                {"provider": "google", "candidates": 1},
                {"provider": "flux", "candidates": 1},
            ],
            frames=["headshot", "image"],
        )
    )
