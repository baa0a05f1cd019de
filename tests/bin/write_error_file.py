"""Write TORCHELASTIC_ERROR_FILE the way torch's @record does (plain open, the umask's mode), exit 1."""

import json
import os
import sys

with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as out:
    json.dump({"message": {"message": "RuntimeError: written like torch", "extraInfo": {}}}, out)
sys.exit(1)
