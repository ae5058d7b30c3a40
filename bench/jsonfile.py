"""The benchmark tools' JSON output (bench/compare, bench/sidebyside, bench/train_compare).

write_json_atomic writes to a temporary file in the target's folder and renames it over the target
once complete: an interrupted or failed run leaves neither a half-written file nor a stray
temporary. The file gets the permissions a plain open() would give (0666 less the umask)."""
import json
import os
import tempfile


def write_json_atomic(path, doc, tool):
    """Writes doc as JSON (indent 1, a final newline) to path; tool names the temporary file."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{tool}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
