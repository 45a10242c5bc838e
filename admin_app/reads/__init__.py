"""The read side: what the admin console and the admin JSON API show, read in one place for both.

Archive headers, members and event pages, archive search, and run and tool-job traces. These are
reads of what the write packages (conversation_audit, runtime, invocations) recorded; a read may
lag a write that commits while it runs, and each says where that matters. Nothing here writes: the
caller records the read in the access log itself.
"""
