"""Import MODULE... with os.environ watched; print, as JSON, the names read during the imports.

Reads through os.environ (``os.environ[...]``, ``.get``, ``in``, ``os.getenv``) are seen;
getenv() from C code is not.
"""

import json
import os
import sys

read: set[str] = set()


class Watched(type(os.environ)):  # type: ignore[misc]
    def __getitem__(self, key: str) -> str:
        read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        read.add(str(key))
        return super().__contains__(key)


environ = os.environ
os.environ = Watched(environ._data, environ.encodekey, environ.decodekey, environ.encodevalue, environ.decodevalue)
for module in sys.argv[1:]:
    __import__(module)
print(json.dumps(sorted(read)))
