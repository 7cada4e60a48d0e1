"""Chat models: the factory (`factory`: which model a request gets, built and closed per
request), failover to a second model (`failover`) and the offline stand-in (`offline`)."""
