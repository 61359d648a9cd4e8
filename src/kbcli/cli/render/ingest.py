"""What an ingest did, or kept when interrupted, in sentences."""

from __future__ import annotations

from kbcli.cli.render.messages import plural
from kbcli.ingest.report import SyncReport


def ingest_summary(report: SyncReport) -> list[str]:
    """The human summary of a sync report, one line per fact worth saying."""
    indexed = report.added + report.updated
    # every file seen is counted once: new, changed, relabelled (same bytes, new --meta) or
    # unchanged
    relabelled = (
        f"{report.metadata_updated} relabelled (new --meta, nothing re-embedded), "
        if report.metadata_updated
        else ""
    )
    lines = [
        f"Indexed {indexed} file{plural(indexed)} ({report.added} new, {report.updated} changed), "
        f"{relabelled}{report.unchanged} unchanged; {report.chunks_added} "
        f"chunk{plural(report.chunks_added)} added, {report.chunks_removed} removed."
    ]
    filled, waiting = getattr(report, "vectors_added", 0), getattr(report, "vectors_missing", 0)
    if filled:
        lines.append(f"Embedded {filled} chunk{plural(filled)} after their files were written.")
    if waiting:
        lines.append(
            f"{waiting} chunk{plural(waiting)} still without a vector: keyword search finds "
            "them; the next kb ingest embeds them."
        )
    rebuilt = getattr(report, "rebuilt", 0)
    if rebuilt:
        lines.append(f"Rebuilt the index: re-embedded {rebuilt} chunk{plural(rebuilt)}.")
    if report.removed:
        n = report.removed
        lines.append(f"Removed {n} indexed file{plural(n)} no longer found under the given paths.")
    if report.skipped:
        lines.append(
            f"Skipped {report.skipped} file{plural(report.skipped)} (other extensions or hidden)."
        )
    folders = getattr(report, "skipped_folders", 0)
    if folders:
        lines.append(
            f"Skipped {folders} folder{plural(folders)} (hidden, or .git, node_modules, "
            "__pycache__; --include-hidden enters them)."
        )
    special = getattr(report, "special", 0)
    if special:
        lines.append(
            f"Skipped {special} special file{plural(special)} (FIFOs, sockets or devices; never "
            "opened)."
        )
    links = getattr(report, "links", 0)
    if links:
        lines.append(
            f"Skipped {links} symbolic link{plural(links)} (not followed without "
            "--follow-symlinks, broken, or leading outside the folder)."
        )
    unreadable = getattr(report, "unreadable", 0)
    if unreadable:
        lines.append(
            f"Could not read {unreadable} folder{plural(unreadable)} or entr"
            f"{'y' if unreadable == 1 else 'ies'} (see warnings); their indexed files were kept."
        )
    if report.failed:
        n = len(report.failed)
        lines.append(f"Failed {n} file{plural(n)} (reasons above).")
    missing = getattr(report, "missing", 0)
    if missing:
        verb = "file no longer exists" if missing == 1 else "files no longer exist"
        lines.append(f"{missing} indexed {verb} and stayed (--no-prune).")
    if report.stale > missing:
        n = report.stale - missing
        verb = "file still exists but is" if n == 1 else "files still exist but are"
        lines.append(
            f"{n} indexed {verb} no longer picked (--ext, .kbignore, hidden, links); run "
            "with --prune to remove them."
        )
    lines.append(f"Done in {report.seconds:.1f} s.")
    return lines


def interrupted_summary(report: SyncReport) -> str:
    """What an interrupted ingest kept, and that the next run resumes."""
    kept = report.added + report.updated
    relabelled = f", {report.metadata_updated} relabelled" if report.metadata_updated else ""
    by = f" ({report.signal})" if report.signal not in (None, "SIGINT") else ""
    return (
        f"Interrupted{by}: kept {kept} file{plural(kept)} indexed in this run ({report.added} new, "
        f"{report.updated} changed{relabelled}; {report.unchanged} were unchanged). Every file "
        "is at its old or its new version; run the same kb ingest again to resume."
    )
