"""Where items live: a JSON file, ~/.todo.json unless TODO_FILE says otherwise."""

import json
import os
from pathlib import Path


def path() -> Path:
    return Path(os.environ.get("TODO_FILE", Path.home() / ".todo.json"))


def load() -> list[dict]:
    try:
        return json.loads(path().read_text())
    except FileNotFoundError:
        return []


def save(items: list[dict]) -> None:
    # Write to a temporary file first so a crash never leaves half a file behind.
    tmp = path().with_suffix(".tmp")
    tmp.write_text(json.dumps(items, indent=2))
    tmp.replace(path())


def next_id(items: list[dict]) -> int:
    return max((item["id"] for item in items), default=0) + 1
