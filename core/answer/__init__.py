"""Answers: the answerer contract (``base.py``), checked citations (``citations.py``), the
extractive default (``extractive.py``), language models (``chat.py`` clients, ``llm.py`` the
answerer, ``prompt.py``) and the sentence support check (``support.py``)."""

from core.answer.base import Answerer, OnText
from core.answer.extractive import ExtractiveAnswerer
from core.answer.llm import LLMAnswerer, make_answerer

__all__ = ["Answerer", "ExtractiveAnswerer", "LLMAnswerer", "OnText", "make_answerer"]
