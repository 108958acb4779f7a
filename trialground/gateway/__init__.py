"""The OpenAI-compatible gateway over the policy under training.

An outside agent program (any code using the `openai` SDK) is pointed at the gateway with
`OPENAI_BASE_URL` / `OPENAI_API_KEY`; each of its calls is answered by the policy, and the gateway records
the call's prompt ids, sampled ids, logprobs and policy version, so the episode is trained on exactly the
tokens that were sampled (`stitch.py`). `app.py` holds the routes, `session.py` the per-episode state,
`conversation.py` how messages become prompt ids, `toolstyle.py` how tool calls are written and parsed in
each template family, `server.py` runs the gateway inside the training process's event loop.
"""
