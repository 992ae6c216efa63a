"""The broker's security: who a connection is (TLS, SASL) and what it may do (ACLs)."""
