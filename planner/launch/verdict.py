"""What ``planner check`` says of one config file: its findings (each with its level, the check, the
flags and the line it names) and metrics, the verdict's JSON and its GitHub Actions annotations.
The checks are :mod:`planner.launch.check`, the readers :mod:`planner.launch.check_read`."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.inputs.validation import rounded


@dataclass
class Finding:
    level: str  # "error" | "warning" | "notice"
    check: str
    message: str
    flags: tuple[str, ...] = ()
    line: int | None = None


@dataclass
class Verdict:
    path: str
    passed: bool = True
    findings: list[Finding] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)
        if finding.level == "error":
            self.passed = False


def verdict_dict(v: Verdict) -> dict:
    return {
        "path": v.path,
        "passed": v.passed,
        "metrics": rounded(v.metrics),
        "findings": [
            {"level": f.level, "check": f.check, "message": f.message, "flags": list(f.flags), "line": f.line}
            for f in v.findings
        ],
    }


def github_lines(v: Verdict) -> list[str]:
    """GitHub Actions workflow commands (``::error file=...,line=...::message``)."""
    out = []
    for f in v.findings:
        level = {"error": "error", "warning": "warning", "notice": "notice"}[f.level]
        where = f"file={v.path}" + (f",line={f.line}" if f.line else "")
        message = f.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        out.append(f"::{level} {where}::{f.check}: {message}")
    return out


__all__ = ["Finding", "Verdict", "github_lines", "verdict_dict"]
