"""Who is calling: bearer tokens (`tokens`: one verifier for Auth0 and the local dev issuer),
the Auth0 tenant (`auth0`: JWKS keys, Management API), signed webhook calls (`webhook`) and
the user's profile as a prompt section (`userdata`)."""
