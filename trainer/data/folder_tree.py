"""What a class-folder tree holds (``ROOT/train/<class>/<image>``, ``ROOT/val/<class>/...``,
torchvision ``ImageFolder``'s layout), locally or under ``gs://``: the class names, which
number 0.. in sorted order and must be the same in both splits, and each split's files; or a
tree of class folders alone (``ROOT/<class>/<image>``) split by a hash of each path."""

from __future__ import annotations

import hashlib
from typing import Dict, List, Tuple

from trainer import storage
from trainer.errors import DataError

# ImageFolder's extensions, compared without case (ImageNet's files end in .JPEG).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
Labelled = List[Tuple[str, int]]  # (file name relative to the root, label)


# What the trainers say when --data_dir has no such tree; make_shards names its own flags.
TRAINER_HINT = ("--data_dir must contain train/ and val/ with one folder of images per class; "
                "or use --fake_data")


def read_tree(root: storage.Directory, splits: Tuple[str, ...] = ("train", "val"),
              missing_hint: str = TRAINER_HINT) -> Tuple[List[str], Dict[str, Labelled]]:
    """(classes, {split: [(file, label), ...] sorted by name}); a DataError (65) when a split
    is missing or empty (with ``missing_hint``), or the splits' class folders differ."""
    found: Dict[str, Dict[str, List[str]]] = {}
    for split in splits:
        by_class = _images_by_class(root, split)
        if not by_class:
            raise DataError("no images in {}/{}/<class>/".format(root.uri, split),
                            missing_hint)
        found[split] = by_class
    classes = sorted(found[splits[0]])
    for split in splits[1:]:
        same_classes(classes, sorted(found[split]), root.uri, splits[0], split)
    labels = {name: index for index, name in enumerate(classes)}
    return classes, {split: [(name, labels[cls]) for cls in sorted(by_class)
                             for name in sorted(by_class[cls])]
                     for split, by_class in found.items()}


def split_class_folders(root: storage.Directory, val_fraction: float
                        ) -> Tuple[List[str], Dict[str, Labelled]]:
    """A tree of class folders alone (``ROOT/<class>/<image>``, no train/ and val/) as
    ``read_tree`` gives a split one: each image goes to val when the SHA-256 of its path,
    read as a fraction of 2**64, is below ``val_fraction``. So the split is the same on every
    run and machine, and an image keeps its split when others are added or removed. A
    DataError (65) when ROOT holds no class folders of images, or has train/ and val/ (which
    are split already), or a class has no image in either split."""
    by_class = _images_by_class(root, "")
    if {"train", "val"} <= set(by_class) or (not by_class and _images_by_class(root, "train")):
        raise DataError("{} has train/ and val/ already: --val_fraction splits a tree of class "
                        "folders only".format(root.uri), "leave out --val_fraction")
    if not by_class:
        raise DataError("no images in {}/<class>/".format(root.uri),
                        "--source must hold one folder of images per class")
    classes = sorted(by_class)
    splits: Dict[str, Labelled] = {"train": [], "val": []}
    for label, cls in enumerate(classes):
        for name in sorted(by_class[cls]):
            digest = hashlib.sha256(name.encode("utf-8")).digest()
            in_val = int.from_bytes(digest[:8], "big") < val_fraction * 2 ** 64
            splits["val" if in_val else "train"].append((name, label))
    for split in ("train", "val"):
        empty = sorted(set(classes) - {classes[label] for _, label in splits[split]})
        if empty:
            raise DataError("--val_fraction={} leaves no {} image of class {} ({} images in "
                            "all)".format(val_fraction, split, _some(empty),
                                          len(by_class[empty[0]])),
                            "every class needs images in both splits: more images per class, "
                            "or a --val_fraction further from 0 and 1")
    return classes, splits


def _images_by_class(root: storage.Directory, split: str) -> Dict[str, List[str]]:
    """{class folder: its image files (names relative to ``root``)} directly under
    ``root/split`` (``split`` "": under ``root``)."""
    depth = 3 if split else 2
    by_class: Dict[str, List[str]] = {}
    for name in root.walk(split):
        parts = name.split("/")
        if len(parts) == depth and name.lower().endswith(IMAGE_EXTENSIONS):
            by_class.setdefault(parts[-2], []).append(name)
    return by_class


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
