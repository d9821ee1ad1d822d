-- 0042: a rule on an attachment (E2B's network.rules, docs/e2b.md "Secrets"): the hosts the
-- attachment's secret goes to in place of the secret's own, and a header the egress proxy sets
-- on requests to them (name, and its value with the attachment's placeholder already in it:
-- the proxy swaps the value in, as for a header the sandbox sent). NULL: no rule.
ALTER TABLE session_secrets ADD COLUMN rule_hosts_json TEXT;
ALTER TABLE session_secrets ADD COLUMN rule_header TEXT;
ALTER TABLE session_secrets ADD COLUMN rule_template TEXT;
