"""Read the Dockerfile with a real parser (dockerfile-parse) and rebuild the image's file
layout under a directory, as its COPY / WORKDIR / ENV lines say: a faithful rehearsal of the
image without a Docker engine."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

from dockerfile_parse import DockerfileParser

from conftest import REPO


@dataclass
class ImageSpec:
    base_image: str
    entrypoint: List[str]
    workdir: str
    env: Dict[str, str]
    copies: List[Tuple[str, str]]  # (source in the context, destination in the image)


def read_image(runtime: str = "xrt") -> ImageSpec:
    """The Dockerfile for profile ``runtime``, with ARGs expanded the way Docker would."""
    parser = DockerfileParser(path=str(REPO / "Dockerfile"))
    args: Dict[str, str] = {}
    workdir, copies, entrypoint, base = "/", [], [], ""
    for instruction in parser.structure:
        kind, value = instruction["instruction"], instruction["value"]
        expanded = _expand(value, args)
        if kind == "ARG":  # defaults, including those before FROM (parser.args omits them)
            name, _, default = value.partition("=")
            args[name] = runtime if name == "RUNTIME" else default
        elif kind == "FROM":  # the last stage is the image; the earlier ones build parts
            base, workdir, copies = expanded.split()[0], "/", []
        elif kind == "WORKDIR":
            workdir = expanded
        elif kind == "COPY" and "--from=" not in value:  # a build stage's output: not here
            *sources, destination = [word for word in expanded.split()
                                     if not word.startswith("--")]
            copies.extend((source, destination + source.rsplit("/", 1)[-1]
                           if len(sources) > 1 else destination) for source in sources)
        elif kind == "ENTRYPOINT":
            entrypoint = json.loads(value)  # exec form is a JSON array; anything else fails
    return ImageSpec(base, entrypoint, workdir, dict(parser.envs), copies)


def _expand(text: str, args: Dict[str, str]) -> str:
    for name, value in args.items():
        text = text.replace("${" + name + "}", value).replace("$" + name, value)
    return text


def assemble(spec: ImageSpec, root: Path) -> Path:
    """Copy every COPY source to its destination under ``root``; returns the WORKDIR path."""
    for source, destination in spec.copies:
        target = root / destination.lstrip("/")
        origin = REPO / source
        if origin.is_dir():
            shutil.copytree(str(origin), str(target),
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(str(origin), str(target))
    workdir = root / spec.workdir.lstrip("/")
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir
