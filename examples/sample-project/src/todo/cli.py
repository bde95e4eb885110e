"""Command-line parsing for todo."""

import argparse

from todo import storage


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="todo", description="A tiny to-do list.")
    sub = parser.add_subparsers(dest="command", required=True)

    add = sub.add_parser("add", help="add an item")
    add.add_argument("text", help="what to do")

    sub.add_parser("list", help="list open items")

    done = sub.add_parser("done", help="mark an item done")
    done.add_argument("id", type=int, help="the item's number")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    items = storage.load()
    if args.command == "add":
        items.append({"id": storage.next_id(items), "text": args.text, "done": False})
        storage.save(items)
    elif args.command == "list":
        for item in items:
            if not item["done"]:
                print(f'{item["id"]:>3}  {item["text"]}')
    elif args.command == "done":
        for item in items:
            if item["id"] == args.id:
                item["done"] = True
                storage.save(items)
                return 0
        print(f"no item {args.id}")
        return 1
    return 0
