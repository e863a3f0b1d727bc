"""What a class-folder tree holds (``ROOT/train/<class>/<image>``, ``ROOT/val/<class>/...``,
torchvision ``ImageFolder``'s layout), locally or under ``gs://``: the class names, which
number 0.. in sorted order and must be the same in both splits, and each split's files."""

from __future__ import annotations

from typing import Dict, List, Tuple

from trainer import storage
from trainer.errors import DataError

# ImageFolder's extensions, compared without case (ImageNet's files end in .JPEG).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
Labelled = List[Tuple[str, int]]  # (file name relative to the root, label)


def read_tree(root: storage.Directory, splits: Tuple[str, ...] = ("train", "val")
              ) -> Tuple[List[str], Dict[str, Labelled]]:
    """(classes, {split: [(file, label), ...] sorted by name}); a DataError (65) when a split
    is missing or empty, or the splits' class folders differ."""
    found: Dict[str, Dict[str, List[str]]] = {}
    for split in splits:
        by_class: Dict[str, List[str]] = {}
        for name in root.walk(split):
            parts = name.split("/")
            if len(parts) == 3 and name.lower().endswith(IMAGE_EXTENSIONS):
                by_class.setdefault(parts[1], []).append(name)
        if not by_class:
            raise DataError("no images in {}/{}/<class>/".format(root.uri, split),
                            "--data_dir must contain train/ and val/ with one folder of "
                            "images per class; or use --fake_data")
        found[split] = by_class
    classes = sorted(found[splits[0]])
    for split in splits[1:]:
        same_classes(classes, sorted(found[split]), root.uri, splits[0], split)
    labels = {name: index for index, name in enumerate(classes)}
    return classes, {split: [(name, labels[cls]) for cls in sorted(by_class)
                             for name in sorted(by_class[cls])]
                     for split, by_class in found.items()}


def same_classes(first: List[str], second: List[str], where: str, first_split: str = "train",
                 second_split: str = "val") -> None:
    """DataError (65) unless both splits hold the same class folders: labels are the folders'
    sorted order, so one missing or extra folder would shift every label after it, silently."""
    if first == second:
        return
    only_first = sorted(set(first) - set(second))
    only_second = sorted(set(second) - set(first))
    raise DataError(
        "{0}/{1} and {0}/{2} have different class folders: {3} only in {1}/, {4} only in "
        "{2}/".format(where, first_split, second_split, _some(only_first), _some(only_second)),
        "give {}/ exactly the class folders of {}/ (labels are the folders' sorted order)"
        .format(second_split, first_split))


def _some(names: List[str]) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:3])
    return shown + (" and {} more".format(len(names) - 3) if len(names) > 3 else "")
