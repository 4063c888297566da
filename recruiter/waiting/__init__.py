"""Jobs that wait for others: the engine that releases or cancels a waiting job when
what it waits for ends (:mod:`.engine`), and the values an application builds them with:
workflows and batches (:mod:`.workflows`)."""
