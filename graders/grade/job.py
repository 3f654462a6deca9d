"""A grading job: one submission to grade, as the parent hands it to a worker, local or on Dask.

A job crosses a process boundary as JSON (a local worker's stdin, a Dask task), so what arrives is
data and is decoded as such: every key present, none unknown, each value of its type, or
:class:`MalformedJob` naming the key.
"""

from dataclasses import dataclass, fields
from pathlib import Path


class MalformedJob(ValueError):
    """JSON that is not a grading job: a key missing or unknown, or a value of the wrong type."""


@dataclass(frozen=True)
class GradingJob:
    """One submission to grade.

    Which submission: ``number`` is its place in the parent's list, how its outcome finds the
    submission again; ``lesson`` and ``student_id`` name it to nbgrader.

    Where, on the machine that grades it: the submitted ``notebook``; ``master``, the course folder
    whose lesson source a job copies; ``template_db``, the blank gradebook it copies; ``work_dir``,
    its private course folder; ``socket_dir``, its kernels' unix sockets (short paths);
    ``jupyter_path``, where the sandbox's kernelspec is; ``slot``, the sandbox user it runs as, set by
    whoever runs it (a local pool's worker, a Dask thread). None of these means anything on another
    machine: a Dask task leaves them behind (:meth:`portable`) and its worker gives the job its own.

    How it runs: the time limits per cell and per notebook; ``sandbox`` ``"on"`` or ``"off"`` (the
    instructor's ``--sandbox off``), and the sandbox's ``kernel_name`` when on.

    Who wrote it: ``submitter``, the names the student may write in ``STUDENT_ID``, and ``roster``,
    every student's, for the judge's identity check (graders/judge/concepts.py); no kernel sees them.

    What the judge draws its inputs from: ``judge_secret``, the class's (graders/judge/calls.py).
    """

    number: int
    lesson: str
    student_id: str
    notebook: Path
    master: Path
    template_db: Path
    work_dir: Path
    socket_dir: Path
    jupyter_path: Path
    cell_timeout: int
    notebook_timeout: int
    sandbox: str
    kernel_name: str
    submitter: tuple[str, ...]
    roster: tuple[tuple[str, ...], ...]
    judge_secret: str
    slot: int = 0

    def to_json(self) -> dict:
        """The job as JSON values: paths as strings, tuples as lists."""
        return {field.name: _encode(getattr(self, field.name)) for field in fields(self)}

    @classmethod
    def from_json(cls, data) -> "GradingJob":
        """The job :meth:`to_json` gave, checked as data (:class:`MalformedJob` names what is wrong)."""
        return cls(**_decoded(data, _TYPES))

    def portable(self) -> dict:
        """The job as a Dask task carries it: as JSON, without the fields local to this machine."""
        return {name: value for name, value in self.to_json().items() if name not in LOCAL}

    @staticmethod
    def decode_portable(data) -> dict:
        """The fields :meth:`portable` sent, decoded and checked as :meth:`from_json` checks a job; the
        worker adds its own local ones (``GradingJob(**fields, notebook=…)``)."""
        return _decoded(data, {name: kind for name, kind in _TYPES.items() if name not in LOCAL})


# The fields whose values hold only on the machine that made them (see GradingJob's docstring).
LOCAL = ("notebook", "master", "template_db", "work_dir", "socket_dir", "jupyter_path", "slot")
_TYPES = {field.name: field.type for field in fields(GradingJob)}


def _encode(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_encode(item) for item in value]
    return value


def _names(value) -> bool:
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


# Each field type as JSON holds it: what a value must be (for the error), the test, the decoding.
_JSON = {
    int: ("an integer", lambda value: type(value) is int, int),  # not a bool, though Python's is an int
    str: ("a string", lambda value: isinstance(value, str), str),
    Path: ("a path (a string)", lambda value: isinstance(value, str), Path),
    tuple[str, ...]: ("a list of strings", _names, tuple),
    tuple[tuple[str, ...], ...]: ("a list of lists of strings",
                                  lambda value: isinstance(value, list) and all(map(_names, value)),
                                  lambda value: tuple(map(tuple, value))),
}


def _decoded(data, types: dict) -> dict:
    """``data``'s values for the fields ``types`` names, decoded; :class:`MalformedJob` names the
    keys missing or unknown, or the first key whose value is not of its type."""
    if not isinstance(data, dict):
        raise MalformedJob(f"a grading job is a JSON object, not {type(data).__name__}")
    for problem, keys in (("missing", types.keys() - data.keys()), ("unknown", data.keys() - types.keys())):
        if keys:
            raise MalformedJob(f"grading job: {problem} key {', '.join(map(repr, sorted(keys, key=str)))}")
    decoded = {}
    for name, kind in types.items():
        what, test, decode = _JSON[kind]
        if not test(data[name]):
            raise MalformedJob(f"grading job: {name!r} must be {what}, not {data[name]!r:.80}")
        decoded[name] = decode(data[name])
    return decoded
