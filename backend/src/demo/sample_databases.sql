-- Sample data for the demo `query_database` tool: three schemas standing in for a
-- company's production, staging and development databases. Each has its own
-- non-superuser login that can read that schema and nothing else, so picking
-- development cannot read production. Safe to run again: it rebuilds them.
-- Several servers may start at once (tests, replicas): one rebuild at a time.
SELECT pg_advisory_xact_lock(7261132201);

DO $$
DECLARE
    login text;
BEGIN
    FOREACH login IN ARRAY ARRAY['toolgate_demo_production', 'toolgate_demo_staging', 'toolgate_demo_development'] LOOP
        BEGIN
            EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L', login, 'demo-reader');
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
        -- Users of one login would otherwise read each other's running SQL in
        -- pg_stat_activity (Postgres hides it only from other roles). Needs a
        -- superuser; roles are shared by every database of the cluster, so a
        -- concurrent start-up may be setting it at the same moment.
        IF NOT EXISTS (
            SELECT FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole
            WHERE r.rolname = login AND s.setdatabase = 0
              AND 'track_activities=off' = ANY (s.setconfig)
        ) THEN
            BEGIN
                EXECUTE format('ALTER ROLE %I SET track_activities = off', login);
            EXCEPTION WHEN OTHERS THEN NULL;
            END;
        END IF;
    END LOOP;
    -- The single login of earlier versions could read all three schemas. It stays
    -- while other databases of the cluster still grant it something.
    BEGIN
        DROP ROLE IF EXISTS toolgate_demo_reader;
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
END
$$;

DROP SCHEMA IF EXISTS demo_production CASCADE;
DROP SCHEMA IF EXISTS demo_staging CASCADE;
DROP SCHEMA IF EXISTS demo_development CASCADE;

CREATE SCHEMA demo_production;
CREATE TABLE demo_production.customers (id int PRIMARY KEY, name text NOT NULL, country text NOT NULL, since date NOT NULL);
CREATE TABLE demo_production.orders (id int PRIMARY KEY, customer_id int NOT NULL REFERENCES demo_production.customers, total numeric(10,2) NOT NULL, ordered_at date NOT NULL);
INSERT INTO demo_production.customers VALUES
    (1, 'Northwind Traders', 'US', '2019-03-01'), (2, 'Contoso Ltd', 'UK', '2020-07-15'),
    (3, 'Fabrikam Inc', 'DE', '2021-01-20'), (4, 'Tailspin Toys', 'US', '2022-05-05'),
    (5, 'Wide World Importers', 'NL', '2023-09-12');
INSERT INTO demo_production.orders
    SELECT g, 1 + (g % 5), round((50 + (g * 37) % 950)::numeric, 2), date '2025-01-01' + (g * 3)
    FROM generate_series(1, 120) AS g;

CREATE SCHEMA demo_staging;
CREATE TABLE demo_staging.customers (LIKE demo_production.customers INCLUDING ALL);
CREATE TABLE demo_staging.orders (LIKE demo_production.orders INCLUDING ALL);
INSERT INTO demo_staging.customers SELECT id, name || ' (staging)', country, since FROM demo_production.customers WHERE id <= 3;
INSERT INTO demo_staging.orders SELECT * FROM demo_production.orders WHERE customer_id <= 3 AND id <= 30;

CREATE SCHEMA demo_development;
CREATE TABLE demo_development.customers (LIKE demo_production.customers INCLUDING ALL);
CREATE TABLE demo_development.orders (LIKE demo_production.orders INCLUDING ALL);
INSERT INTO demo_development.customers VALUES (1, 'Test Customer', 'US', '2026-01-01');
INSERT INTO demo_development.orders VALUES (1, 1, 9.99, '2026-01-02');

GRANT USAGE ON SCHEMA demo_production TO toolgate_demo_production;
GRANT SELECT ON ALL TABLES IN SCHEMA demo_production TO toolgate_demo_production;
GRANT USAGE ON SCHEMA demo_staging TO toolgate_demo_staging;
GRANT SELECT ON ALL TABLES IN SCHEMA demo_staging TO toolgate_demo_staging;
GRANT USAGE ON SCHEMA demo_development TO toolgate_demo_development;
GRANT SELECT ON ALL TABLES IN SCHEMA demo_development TO toolgate_demo_development;
