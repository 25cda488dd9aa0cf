"""How a planned turn is run and answered, whatever the front door (``/v1/chat/completions``,
``/v1/responses``, ``/v1/messages``): the wait for the turn, what its outcome means in HTTP terms
(a :class:`~turngate.api.turn_answer.refusals.Refusal`, the recorded EXECUTION, or the pieces of
a stream), and the stream slot a streamed answer holds. Each front door only renders these in its
own wire format (a :class:`~turngate.api.turn_answer.serve.WireFormat`).
"""
