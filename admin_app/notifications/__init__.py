"""Notifications of new approvals: channels (webhook, e-mail) chosen per route or tool, a
transactional outbox written with the approval, and the worker that delivers it.

Only bounded fields of an approval ever leave the hub (its summary, tool, route, risk, sizes and
hash); the argument snapshot stays in the console, read on demand.

- `channels`: the configured channels (the `approval_notifications` section of the config file).
- `outbox`: `enqueue`, called in the transaction that creates an approval.
- `bell`: wakes this process's worker when such a transaction commits.
- `message`: what a notification says (webhook JSON and its signature, the e-mail).
- `senders`: one attempt over HTTP or SMTP.
- `deadline`: one deadline for a whole attempt, whatever pace the other end keeps.
- `redact`: a webhook URL shown as its origin only (its path and query are its secret).
- `worker`: claims due deliveries under a lease, sends, records, retries with back-off.
- `deliveries`: the console's list of recent deliveries.
"""
