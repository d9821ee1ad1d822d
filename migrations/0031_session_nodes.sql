-- 0031: where each session runs (issue 26, many nodes). The node (its certificate's common name)
-- whose agent serves the session's directory and sockets: chosen by the control daemon for an
-- engine that does not place containers itself (Docker: node_name, or the connected node with the
-- fewest sessions), read from the engine for one that does (Kubernetes: the Pod's spec.nodeName).
-- A session keeps its node while its container lives; the row goes with the container (a drop),
-- and a new container may land elsewhere. Streams from any other node are refused.
CREATE TABLE session_nodes (
        user_id    TEXT NOT NULL,
        session_id TEXT NOT NULL,
        node       TEXT NOT NULL,
        placed_at  INTEGER NOT NULL,               -- unix ms
        PRIMARY KEY (user_id, session_id)
);
CREATE INDEX session_nodes_node ON session_nodes (node);
