"""repo-expert core: the shared async pipeline (config → ingest → chunk → embed → store →
retrieve → answer) that the command line and the chat adapters call."""

__version__ = "0.1.0"
