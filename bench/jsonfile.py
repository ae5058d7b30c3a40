"""The benchmark tools' JSON (bench/compare, bench/sidebyside, bench/train_compare).

json_lines reads the JSON records a measuring program prints, one per line (addnorm_compare,
addnorm_train_step); a line that starts as a record but does not parse is an error naming the
program and the line, not a traceback from inside json. write_json_atomic writes to a temporary file in the target's folder and renames it over the target
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


class JsonLineError(ValueError):
    """A line of a program's output that starts with '{' but is not a JSON object."""


def json_lines(text, source):
    """The JSON objects among text's lines (those that start with '{', spaces aside), in order;
    source names the program in an error."""
    records = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise JsonLineError(f"{source}: output line {number} is not JSON ({e.msg}): {line[:200]}") from None
        records.append(record)  # a dict: valid JSON that starts with '{' is an object
    return records
