"""What generate() left behind, for the tests of planning a batch."""

from typing import Any

from studio.models import Asset, Batch, Task


def nothing_created() -> bool:
    return Batch.objects.count() == 0 and Task.objects.count() == 0


def frozen(asset: Asset) -> dict[str, Any]:
    return {"asset": asset.pk, "sha256": asset.sha256, "name": asset.file_name, "mime": asset.mime}
