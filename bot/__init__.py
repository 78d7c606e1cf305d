"""The chat faces of repo-expert: thin Slack and Discord adapters over ``RepoExpert.ask``.

``common`` holds what both share (access rules, limits, thread history via
``core.conversations``); ``slack``/``slack_blocks`` and ``discord`` do the platform I/O and
rendering; ``serve`` checks the configuration and runs them; ``messages`` holds every sentence
they say.
"""
