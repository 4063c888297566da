"""Jobs blocked on others: the engine that releases or cancels them (:mod:`.engine`), and
the workflows and batches an application builds them with (:mod:`.workflows`)."""
