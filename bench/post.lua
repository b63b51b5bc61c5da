-- POST /plants with a fresh id on every request: ids start at the first
-- script argument (a per-run base, so runs never collide) and count up.
local next_id

function init(args)
  next_id = tonumber(args[1] or "1000000000000")
  -- wrk.format uses the headers it is given instead of wrk.headers (the -H
  -- options, which carry the bearer token): give it both.
  wrk.headers["Content-Type"] = "application/json"
end

function request()
  next_id = next_id + 1
  local body = string.format('{"id": %d, "name": "plant-%d", "tag": "bench"}', next_id, next_id)
  return wrk.format("POST", nil, nil, body)
end
