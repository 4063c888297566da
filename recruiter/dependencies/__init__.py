"""Jobs blocked on others: the engine that releases or cancels a blocked job when
what it waits for ends (:mod:`.engine`), and the values an application builds them with:
workflows and batches (:mod:`.workflows`)."""
