"""The agent: the turn loop (`anvild.agent.loop`) and the tools it calls (`anvild.agent.tools`).

This package imports nothing of the 9P service (`anvild.ninep`) or the synthetic tree
(`anvild.fs`): sessions publish the agent's events; the agent does not know it is published.
"""
