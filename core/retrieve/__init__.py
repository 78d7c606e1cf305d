"""Retrieval: question analysis (``analyse.py`` signals and route, ``language.py``,
``followup.py``, ``glossary.py``), candidates per collection (``candidates.py``), fusion across
collections (``fusion.py``), and the pipeline that ties them (``search.py``), run as
``options.py`` says."""

from core.retrieve.analyse import Route, analyse
from core.retrieve.fusion import Candidate, allocate, select
from core.retrieve.options import MODES, Mode, Options
from core.retrieve.search import retrieve

__all__ = [
    "MODES",
    "Candidate",
    "Mode",
    "Options",
    "Route",
    "allocate",
    "analyse",
    "retrieve",
    "select",
]
