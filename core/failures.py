"""What an environmental failure means for the user: disk full, permission denied, a folder where a
file belongs, an unreachable object store. One place turns them into one `error:` line with the fix.

A failure from the JVM reaches Python as text (a Java exception's message inside a streaming query's
error), so the text of the whole cause chain is read, but only for these operating-system facts.
"""

from __future__ import annotations

import errno


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def explain(exc: BaseException) -> str | None:
    """The cause and the fix of an environmental failure, or None when `exc` is not one."""
    chain = _chain(exc)
    text = " ".join(str(e) for e in chain)
    numbers = {getattr(e, "errno", None) for e in chain}
    where = next((f" ({e.filename})" for e in chain if getattr(e, "filename", None)), "")
    if errno.ENOSPC in numbers or errno.EDQUOT in numbers or "No space left on device" in text or "Disk quota exceeded" in text:
        return (
            f"disk full: no space left on the device{where}; free space or point LAKEMV_WAREHOUSE / LAKEMV_LOCAL_DIR at a "
            "larger disk, then run again: the next run redoes the batch that was cut short, exactly once"
        )
    if errno.EACCES in numbers or errno.EPERM in numbers or "Permission denied" in text:
        return f"permission denied{where}: the user running lakemv cannot write there; fix the folder's owner or mode"
    if errno.EROFS in numbers or "Read-only file system" in text:
        return f"read-only file system{where}: point LAKEMV_WAREHOUSE / LAKEMV_LOCAL_DIR at a writable folder"
    if "AWS Error NETWORK_CONNECTION" in text or ("Could not connect to server" in text and "s3" in text.lower()):
        return "cannot reach the object store (LAKEMV_S3_ENDPOINT): is it running, and is the endpoint right?"
    return None
