"""``Finding``: one problem in a checked file, printed as one line (level, path, problem, fix).
Shared by the job-file rules and the cloudbuild rules, which import nothing else from each
other."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.report import printable

ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Finding:
    level: str  # ERROR (the service would refuse it) or WARNING (advice)
    path: str  # where in the YAML: trainingInput.workerConfig.acceleratorConfig.count
    problem: str
    fix: str

    def __str__(self) -> str:
        # One line, whatever the file held (a value "\n" is echoed in problems).
        return printable("{}: {}: {}; fix: {}".format(self.level, self.path, self.problem,
                                                     self.fix))


def join(path: str, key: object) -> str:
    return "{}.{}".format(path, key) if path else str(key)
