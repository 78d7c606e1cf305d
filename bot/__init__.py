"""The faces of repo-expert: thin Slack and Discord adapters over ``RepoExpert.ask`` and the
GitHub webhook receiver over ``RepoExpert.sync``.

``common`` holds what the chat faces share (access rules, limits, thread history via
``core.store.conversations``); ``slack``/``slack_blocks`` and ``discord`` do the platform I/O and
rendering; ``webhooks`` turns verified deliveries into syncs; ``serve`` checks the configuration
and runs them; ``messages`` holds every sentence they say.
"""
