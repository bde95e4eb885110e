import os
import tempfile
import unittest

from todo import cli, storage


class TodoTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        os.environ["TODO_FILE"] = os.path.join(self.dir.name, "todo.json")

    def tearDown(self):
        self.dir.cleanup()

    def test_add_then_list(self):
        self.assertEqual(cli.main(["add", "buy milk"]), 0)
        self.assertEqual(storage.load()[0]["text"], "buy milk")

    def test_done_marks_item(self):
        cli.main(["add", "a"])
        self.assertEqual(cli.main(["done", "1"]), 0)
        self.assertTrue(storage.load()[0]["done"])

    def test_done_unknown_item_fails(self):
        self.assertEqual(cli.main(["done", "9"]), 1)


if __name__ == "__main__":
    unittest.main()
