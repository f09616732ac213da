-- Owner tokens are at most 2^53 (flight.MaxToken): the flight scripts compare them as Lua
-- numbers, doubles exact up to 2^53, and Redis issues them from its clock in microseconds, far
-- below. A larger one can only be forged, and as the largest token of a key it would refuse
-- every later write. NOT VALID: rows already there are not checked, new ones are.
ALTER TABLE flightdeck_outcomes ADD CONSTRAINT flightdeck_outcomes_token_bound
    CHECK (owner_token <= 9007199254740992) NOT VALID;
ALTER TABLE flightdeck_claims ADD CONSTRAINT flightdeck_claims_token_bound
    CHECK (owner_token <= 9007199254740992) NOT VALID;
