-- Sample data for the demo `query_database` tool: three schemas standing in for a
-- company's production, staging and development databases, readable by one
-- non-superuser login and nothing else. Safe to run again: it rebuilds them.
-- Several servers may start at once (tests, replicas): one rebuild at a time.
SELECT pg_advisory_xact_lock(7261132201);

DO $$
BEGIN
    BEGIN
        CREATE ROLE toolgate_demo_reader LOGIN PASSWORD 'demo-reader';
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
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

GRANT USAGE ON SCHEMA demo_production, demo_staging, demo_development TO toolgate_demo_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA demo_production, demo_staging, demo_development TO toolgate_demo_reader;
