"""The wire records (issue 15): what the controller, its agents, the REST API and the CLI
exchange, defined once.

* :mod:`muster.protocol.records` — the query records (Job, Node, Partition, StepInfo, Step)
  and the submit request, as msgspec Structs;
* :mod:`muster.protocol.agentmsg` — the agent → controller messages, as a tagged union the
  controller decodes every agent frame into (strict types; a malformed one is refused);
* :mod:`muster.protocol.fields` — the field names alone, standard library only, for the CLI.

This ``__init__`` imports nothing: the CLI imports ``muster.protocol.fields`` and must not pull
msgspec in on its way (tests/unit/test_import_contract.py).
"""
