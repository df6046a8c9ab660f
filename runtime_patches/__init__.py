"""Version-guarded runtime patches of OpenHands (the agent SDK and the stock CLI), each small and tested.

The import hook in `mars_openhands.openhands.importhook` applies them by module name; they import
`mars_openhands.openhands`, never the reverse.
"""
